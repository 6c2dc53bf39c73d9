"""An agent without a handler: run() must refuse to start."""

import baton

baton.Agent().run()
