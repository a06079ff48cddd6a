"""Generated protobuf and gRPC modules (checked in; regenerate with `make proto`).

Modules: binlog_pb2, pump_pb2(_grpc), cistern_pb2(_grpc), secondary_binlog_pb2,
pb_binlog_pb2, pd_pb2(_grpc).  `gogo` marshals tipb messages byte-for-byte as the
original Go code does.
"""
