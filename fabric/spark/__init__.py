"""What the Spark source and sinks, the jobs and the notebooks share: option lookup, the configured
SparkSession and the jobs' command line and run loop."""
