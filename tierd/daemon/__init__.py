"""Everything that runs on the node: runtime, detect, catalog, pipeline, backends, retention, fleet."""
