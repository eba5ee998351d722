"""`dispatch web`: the fleet in a browser, live, read-only unless an operator signs in.

A process of its own that reads Redis and never runs a job; any machine that reaches the
fleet's Redis can serve it. The pages read the same model as `dispatch status`
(dispatch/fleet/view.py), one snapshot a second shared by every open page (feed.py).

    serve.py          the command: where to listen, the token, uvicorn
    app.py            the ASGI app: routes, session, security headers, error pages
    site.py           what every route reads, and how a page is rendered
    auth.py           who may do what: sign-in, the session, CSRF
    feed.py           the shared snapshot and the overview's event stream
    pages.py          the pages anyone may read
    actions.py        what a signed-in operator may change, each behind a confirm
    listing.py        the jobs page's Redis-side paging
    tails.py          a job's output, live
    run_history.py    the Runs page: run records binned, throughput and waits
    spend_history.py  the Spend page: each ledger's counters over 30 days
    charts.py         those numbers as inline SVG
    words.py          what the templates show, in words
"""
