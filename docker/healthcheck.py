"""Container health probe: exit 0 if the gRPC server on 127.0.0.1:$CNNVIDEO_PORT answers SERVING."""
import os
import sys

import grpc

# grpc.health.v1.Health/Check with an empty HealthCheckRequest (service ""); the reply
# HealthCheckResponse{status: SERVING} is field 1 = 1, i.e. bytes 08 01. Raw bytes keep this
# probe free of generated stubs and of torch, so it stays cheap under a small CPU cap.
SERVING = b"\x08\x01"


def check(address: str, timeout: float = 3.0) -> bool:
    """True if the server at address reports SERVING."""
    with grpc.insecure_channel(address) as chan:
        try:
            return chan.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=timeout) == SERVING
        except grpc.RpcError:
            return False


if __name__ == "__main__":
    port = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CNNVIDEO_PORT", "")
    if not port.isdigit():
        sys.exit("healthcheck: no port (argument or CNNVIDEO_PORT)")
    sys.exit(0 if check("127.0.0.1:" + port) else 1)
