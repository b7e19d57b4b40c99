"""Hand-overs to other frameworks (DeepSpeed), each in its own module, loaded only on use."""
