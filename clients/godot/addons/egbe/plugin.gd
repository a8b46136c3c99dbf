tool
extends EditorPlugin
# Makes EgbeClient a node type in the editor's "Add Node" dialog.


func _enter_tree():
	add_custom_type("EgbeClient", "Node", preload("egbe_client.gd"), null)


func _exit_tree():
	remove_custom_type("EgbeClient")
