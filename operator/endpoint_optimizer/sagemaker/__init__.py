"""The only code that talks to AWS: clients, request builders, naming, the technique matrix."""
