"""The services: the rules between the edges and the store.

A service is what the edges (the HTTP API; the CLI, which goes through the API) call to act on
tickwork's state: `JobService` (`jobs`), `DeadLetterService` (`dead_letters`) and
`TenantService` (`tenants`). Each takes a `ScheduleStore` and a `Clock`; every write goes
through a store method, and every instant comes from the injected clock, read once per call
(once per try of an edit retried on a stale write), so one request sees one "now".

What a job may be and how its state changes are pure functions in `rules`: no store, no
clock, `now` passed in.
"""
