"""spark-submit streaming jobs; each runs as `spark-submit jobs/<job>.py --url ... --checkpoint ...`."""
