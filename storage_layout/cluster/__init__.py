"""The cluster: node records (nodes.py), tools' partition leases (leases.py), and the one
node-to-node protocol (routes.py: the paths; codec.py: the bodies; client.py: the client;
errors.py: why a call failed). It sits below pipeline/ because Spark executors hand appends
to a partition's leader too; the HTTP front-end only mounts the routes."""
