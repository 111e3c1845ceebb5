"""The API's routes, one router per area, in the order the app includes them.

The order is the OpenAPI description's (and so the /docs page's): each path appears where its
first route is included.
"""

from . import answers, campaigns, enrolment, listing, recovery, runs, tokens

#: The API's routers in order (the browser page, ``pages``, goes after the static files).
ROUTERS = (
    campaigns.router,
    tokens.router,
    listing.router,
    enrolment.router,
    recovery.router,
    answers.router,
    runs.router,
)
