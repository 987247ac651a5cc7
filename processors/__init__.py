"""The four processors (conversation, dispatcher, tool, memory) and their ``protocol``."""
