"""`python -m netem`: shape a compose project's links with tc and keep them shaped until stopped."""
import sys

from .main import main

sys.exit(main())
