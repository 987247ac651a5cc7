"""Running the log again: shadow replay of today's handlers on a recording (:mod:`.shadow`),
exported bundles (:mod:`.bundle`) and a redrive's claim on its sandbox prefix
(:mod:`.sandbox`). The redrive itself runs a stack: :mod:`hermesbus.compose.redrive`."""
