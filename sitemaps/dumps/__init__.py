"""Resource Dumps and Change Dumps: ZIP packages with manifests, built incrementally.

A regeneration run builds them after the lists, when the set publishes them
(`build_dumps`). Packages own key ranges (Resource Dump) or Change List
windows (Change Dump) the way list pages do, so one change rebuilds one
package. The bytes come from the generator (`open_resource`), checked
against the records; what cannot be packaged is reported, never packaged
wrong. Modules: `packaging` (one ZIP), `resource_dump` and `change_dump`
(which packages), `documents` (`resourcedump.xml`, `changedump.xml`),
`switch` (a run's packages and dump documents served at once, at its end),
`storage` (packages in the document storage), `views` (serving, with Range).
"""
