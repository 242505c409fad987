"""The orgmem Celery app with a short visibility timeout, so the redelivery test does not wait
an hour for Redis to hand a killed worker's task to another worker. Everything else is the
production configuration."""

from workers.maintenance.celery_app import app

app.conf.broker_transport_options = {
    **app.conf.broker_transport_options,
    "visibility_timeout": 8,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}
