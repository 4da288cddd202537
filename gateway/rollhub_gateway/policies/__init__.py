"""The policies a gateway serves: routing a model call by its model name (:mod:`.routes`),
and the served policies built from a run's ``[[policies]]`` (:mod:`.serving`)."""
