"""What the training engines people use can run (:mod:`shardwise.engines.support`)."""
