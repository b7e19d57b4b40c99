"""Support for testing accelerators: simulated vendor runtimes and the conformance kit."""
