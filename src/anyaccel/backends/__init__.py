"""The built-in backends: one small module per kind of hardware."""
