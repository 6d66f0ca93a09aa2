"""One function per dashboard page, returning a frozen dataclass the page (and the report) renders.

``overview``, ``cache_view``, ``latency_view``, ``cost_view``, ``runs_view``, ``collection_view``,
``topology_view`` and ``whatif`` read through ``kvplan.app.data`` (the plan of a window is
``kvplan.app.data.plan``, priced from the deployment's ``kvplan.app.data.history``) and compute
through ``models``; none of them touches Streamlit, and none imports another page's view. A new
page gets its function here first.
"""
