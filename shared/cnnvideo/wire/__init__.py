"""What crosses a hop: the tensor codec, the hop protocol, run settings, TLS and link pacing."""
