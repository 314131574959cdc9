"""The log storage engine: a Log owns Segments; a Segment owns its data file and its indexes."""
