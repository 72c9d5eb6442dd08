"""What PRISM reads and writes: the sample store, measured reference steps, importers of
outside measurements, and adapters for published end-to-end tables."""
