"""``python -m hermesbus.processors.flow``: write ``flow.schema.json`` from the models."""

import json
from pathlib import Path

from hermesbus.processors.flow import SCHEMA_FILE, generated_schema

if __name__ == "__main__":
    target = Path(__file__).resolve().with_name(SCHEMA_FILE)  # the source, not a link to it
    target.write_text(json.dumps(generated_schema(), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {target}")
