"""Generated protobuf code (tools/gen_protos.py)."""
