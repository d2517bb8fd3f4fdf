"""The substrate as a service: ``ocrr serve`` (FastAPI + uvicorn) and its review page.

``app.create_app(ServiceState(...))`` builds the app; ``cli`` has the command.
"""
