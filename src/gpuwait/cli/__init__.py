"""The gpuwait command line: thin commands over the library, one output sink."""
