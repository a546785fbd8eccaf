"""HTTP routes, one module per resource. Routes parse, make one broker call, shape the reply."""
