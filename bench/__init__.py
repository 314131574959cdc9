"""Benchmarks (`make bench`): each compares the fabric with a peer on the same records in the same run."""
