"""The four processors (conversation, dispatcher, tool, memory) arrive with issue #4."""
