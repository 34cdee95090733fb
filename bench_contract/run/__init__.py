"""The run skeleton every backend plugs into: runner, training, inference, batch search, parity, failure rows, stop signals, topology; the top wing."""
