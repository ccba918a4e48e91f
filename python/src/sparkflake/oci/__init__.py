"""oci stage."""
