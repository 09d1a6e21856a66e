import grpc, time, os, sys, threading, resource
from concurrent import futures
import queue
from grpc import unary_unary_rpc_method_handler, stream_unary_rpc_method_handler, method_handlers_generic_handler
ident = lambda b: b
def unary(req, ctx): return b"ok"
def stream(it, ctx):
    n = 0
    for r in it: n += 1
    return b"%d" % n
def bidi(it, ctx):
    for r in it: yield b"ok"
h = method_handlers_generic_handler("B", {
  "U": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
  "S": grpc.stream_unary_rpc_method_handler(stream, ident, ident),
  "D": grpc.stream_stream_rpc_method_handler(bidi, ident, ident)})
if sys.argv[1] == "server":
    s = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", 64<<20)])
    s.add_generic_rpc_handlers((h,)); s.add_insecure_port("127.0.0.1:50999"); s.start(); s.wait_for_termination()
else:
    N = 600; payload = os.urandom(int(sys.argv[2]))
    ch = grpc.insecure_channel("127.0.0.1:50999", options=[("grpc.max_send_message_length", 64<<20)])
    U = ch.unary_unary("/B/U", ident, ident); S = ch.stream_unary("/B/S", ident, ident); D = ch.stream_stream("/B/D", ident, ident)
    U(payload)
    def cpu(): r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
    for mode in ["unary", "stream", "bidi", "unary", "stream", "bidi"]:
        c0 = cpu(); t0 = time.time()
        if mode == "unary":
            for i in range(N): U(payload, timeout=10)
        elif mode == "stream":
            q = queue.Queue()
            f = S.future(iter(q.get, None))
            for i in range(N): q.put(payload); 
            q.put(None); f.result()
        else:
            q = queue.Queue()
            it = D(iter(q.get, None))
            for i in range(N):
                q.put(payload); next(it)
            q.put(None)
        print(mode, sys.argv[2], "%.3f ms cpu/msg" % ((cpu()-c0)/N*1e3), "%.3f ms wall/msg" % ((time.time()-t0)/N*1e3))
