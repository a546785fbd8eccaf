"""Delta layout and the partition log core. The only package that imports deltalake."""
