"""One function per dashboard page, returning plain data the page (and the report) renders.

``overview`` (with the plan), ``cache_view``, ``latency_view``, ``cost_view``, ``runs_view``,
``collection_view`` and ``topology_view`` read through ``kvplan.app.data`` and compute through
``models``; none of them touches Streamlit. A new page gets its function here first.
"""
