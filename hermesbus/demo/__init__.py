"""The expense-report demo: its two conversations against a running stack
(:mod:`.expense`) and the scripted tools its tests, and yours, answer calls with
(:mod:`.scripted`). The demo's tools themselves are ``hermesbus.processors.tool.demo``."""
