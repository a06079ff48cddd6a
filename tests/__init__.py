"""The test suite.

grpc's fork handlers (on by default) can abort a child process started with fork+exec while
gRPC threads run in this process (`epoll_wait error: Bad file descriptor`); the tests start many
such children (etcd, pd-server, pumps, drainers), so the handlers are turned off before grpc
is first imported, which happens through the conftest's imports.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
