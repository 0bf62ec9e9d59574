"""The protocol core: wire formats and (later) the marker aligner and version/generation
rules. Nothing in this package does I/O."""
