"""The smallest Django settings that serve `srv_fw_django` (no database, no middleware)."""

SECRET_KEY = "test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "srv_fw_django"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict = {}
USE_TZ = True
LOGGING_CONFIG = None
