"""`fabric`: Kafka's command-line tools as one command. One module per command group; `main` runs it."""
