"""What every layer stands on: settings and the state folder (:mod:`.config`), the service
lifecycle (:mod:`.lifecycle`), logging (:mod:`.logs`), Ctrl-C (:mod:`.sigint`), text made
safe for a terminal (:mod:`.printable`) and the marks that tell a store came back empty
(:mod:`.storemark`). It imports nothing of hermesbus but :mod:`hermesbus.errors`."""
