"""The HTTP front-end: Confluent REST Proxy v2/v3 routes and lakelog's own, over the broker
core. Translates JSON/base64 bodies and HTTP errors (api/http/errors.py is the one error -> HTTP
table); REST consumer instances, an HTTP concept, live here too."""
