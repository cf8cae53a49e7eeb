from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "sweeps"
