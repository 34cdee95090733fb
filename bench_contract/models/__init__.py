"""Architecture tables and the shared initial weights both backends build from; imports only the contract's root (spec, results, atomic)."""
