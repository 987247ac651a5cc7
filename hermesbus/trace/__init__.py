"""Reading what happened: a trace as spans and a waterfall from the log (:mod:`.spans`),
``tail`` (:mod:`.tail`), and the trace index with its archive and indexer (:mod:`.index`)."""
