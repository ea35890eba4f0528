"""The API's JSON shapes, in and out."""
