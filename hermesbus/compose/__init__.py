"""The composition root: what picks the backends (:mod:`.backends`), wires them and the
processors into a running bus (:mod:`.stack`), with the catalog's topics created
(:mod:`.provision`) and the tools probed (:mod:`.probes`), runs a redrive in a sandbox
(:mod:`.redrive`), launches the embedded broker (:mod:`.broker`) and holds one bus per
state folder (:mod:`.homelock`). Only this package and the CLI choose implementations."""
