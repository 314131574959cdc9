"""The fabric protocol (docs/protocol.md): requests and answers as length-prefixed frames over one long-lived TCP
connection per client and server, many in flight at once, matched by request id. `frames` lays out a frame and
reads frames from a byte stream; `messages` encodes and decodes the JSON headers of requests and answers.
"""
