"""The social layer: objectives, learning by example, goal and life arcs, crossroads, minor protection."""
