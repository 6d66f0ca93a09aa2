"""Scripts and harnesses that record from the real local stack: the payload fixtures, the demo
dataset, lookup-hash traces, measured reuse-off/reuse-on A/Bs (``ab``) and the load-sweep check
(``sweep_check``). Development tooling: no ``kvplan`` command uses them, so the wheel leaves
this package out; run them from a checkout (``python -m kvplan.deploy.local.recorders.NAME``)."""
