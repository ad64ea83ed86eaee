"""The ResourceSync protocol layer, free of Django.

Names and limits (`constants`), record types (`records`), the one XML writer
(`writer`, with `xmlchars`, the rule of what a document may hold), the builders
that turn records into documents (`builders`) and the safe reader (`reader`).
The harvester and the validator import these without a Django app.
"""
