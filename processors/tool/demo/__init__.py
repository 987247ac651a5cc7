"""The demo tools of the expense-report walkthrough (``README.md`` here) over DEMO FIXTURES.

``demo_keys()`` join the environment the tool service is given (``ToolService(...,
environ={**environ, **demo_keys()})``: the demo specs pass only the private key to their
workers, the processor verifies with the public one), then ``await register_demo(tools)``.
"""

from hermesbus.processors.tool.demo import fixtures
from hermesbus.processors.tool.demo._specs import (
    DEMO_TOOLS,
    demo_keys,
    demo_mcp_document,
    demo_mcp_server,
    demo_specs,
    register_demo,
)
from hermesbus.processors.tool.demo.tools import DEMO_SIGNING_ENV, DEMO_VERIFY_ENV, DemoToolError

__all__ = [
    "DEMO_SIGNING_ENV",
    "DEMO_TOOLS",
    "DEMO_VERIFY_ENV",
    "DemoToolError",
    "demo_keys",
    "demo_mcp_document",
    "demo_mcp_server",
    "demo_specs",
    "fixtures",
    "register_demo",
]
