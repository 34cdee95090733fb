"""Planning: the catalog, the matrix of cells, the cluster profile, the rendered scripts and the campaign manifest; imports only the root (errors, tables)."""
