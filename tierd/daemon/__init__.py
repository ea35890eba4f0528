"""Everything that runs on the node.

runtime, detect, catalog, pipeline, transfer, backends, retention, restore, scrub, fleet.
"""
