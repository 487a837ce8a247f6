"""Writing stores from a cluster engine's tasks: planning on the driver (the
converter's rules), one part per task, committed atomically, and publishing
from the driver without reading a record. ``loaderx.spark`` and ``loaderx.ray``
are the engines' front ends."""
