"""The vocabulary every layer shares: errors, name rules, value types, configs and the record layout.
Imports nothing of the fabric's own outside this package."""
