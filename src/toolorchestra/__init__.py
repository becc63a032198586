"""toolorchestra: small orchestrator models that coordinate tools and other models.

The package follows the data flow task -> agent loop -> tools -> trajectory -> reward -> trainer;
see docs/architecture.md. Importing it is cheap: torch and transformers load only when a local
model is actually used.
"""

__version__ = "0.1.0"
