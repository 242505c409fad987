"""The pure core: no I/O, no framework imports. Everything here is a function of its inputs."""
