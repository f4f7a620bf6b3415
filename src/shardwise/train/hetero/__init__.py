"""Training on a cluster of several GPU types: the estimate (:mod:`.estimate`), the layer split between
groups (:mod:`.split`), the planner (:mod:`.plan`), its result and report (:mod:`.result`, :mod:`.report`)
and the timeline (:mod:`.trace`)."""
